"""The Redis store: key builders, Lua scripts and the Store class."""

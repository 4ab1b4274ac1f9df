"""The service's use cases on plain values: what the HTTP layer asks and the stores answer."""

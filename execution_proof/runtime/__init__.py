"""What every process shares: settings from the environment, logging, metrics."""

"""The run configuration: flags and experiment files in, one checked RunConfig out, the run's plan and its models'
settings."""

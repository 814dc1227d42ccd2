"""The command line and the config: schemas, range checks, help, error explanations, cost estimates."""

"""flows: Prefect flows and deployments that wire the stages together (no logic of their own)."""

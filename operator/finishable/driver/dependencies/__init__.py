"""What a driver fetches and checks before the program starts (docs/dependencies.md)."""

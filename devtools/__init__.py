"""Development tooling: the embedded servers and the `make run` supervisor. Never imported by the apps or settings."""

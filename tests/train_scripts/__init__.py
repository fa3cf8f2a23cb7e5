"""Real Ray Train V2 runs that misbehave on purpose, for raywatch's tests."""

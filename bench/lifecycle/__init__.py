"""The lifecycle benchmark's fixtures: small-number synthetic problems, the exact step judge and the SFT policy."""

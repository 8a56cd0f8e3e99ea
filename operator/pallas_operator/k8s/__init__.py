"""The only code that talks to the API server (besides kopf's own watches, wired in `wiring`)."""

"""The only code that talks to the API server (besides kopf's own watching in handlers/)."""

"""`pallas run`'s hosting of PallasTriggers: the webhook endpoint, and the loops beside it.

- `webhook`: the HTTP endpoint of webhook triggers (signature first, body bounded);
- `host`: a process's schedule loops and webhook listener together.

The runs themselves are `pallas_io.triggers` (shared with the operator); the rules
`pallas_api.triggers`.
"""

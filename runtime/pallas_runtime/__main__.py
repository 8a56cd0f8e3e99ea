"""`python -m pallas_runtime`: the `pallas` program, for environments without its script."""

from pallas_runtime.cli import main

raise SystemExit(main())

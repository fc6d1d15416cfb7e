"""`python -m mdrag` runs the command line."""

from mdrag.frontends.cli import main

raise SystemExit(main())

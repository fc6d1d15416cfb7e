"""`python -m mdrag` runs the command line."""

from mdrag.cli import main

raise SystemExit(main())

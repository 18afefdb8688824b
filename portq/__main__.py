"""``python -m portq`` runs the ``portq`` command."""

from portq.cli import main

raise SystemExit(main())

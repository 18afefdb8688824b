"""``python -m portq.cli``: the ``portq`` command."""

from portq.cli.app import main

raise SystemExit(main())

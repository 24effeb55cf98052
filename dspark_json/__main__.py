"""``python -m dspark_json`` is the ``dspark-json`` command."""

from dspark_json.cli import main

raise SystemExit(main())

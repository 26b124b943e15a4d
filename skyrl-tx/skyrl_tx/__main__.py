"""`python -m skyrl_tx serve ...` equals the `skyrl-tx` console script."""

from skyrl_tx.cli import main

raise SystemExit(main())

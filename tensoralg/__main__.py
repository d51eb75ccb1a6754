"""``python -m tensoralg``: the same command as the ``tensoralg`` console script."""
from tensoralg.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

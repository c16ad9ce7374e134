"""Allow ``python -m gitea_runner_operator``."""

from gitea_runner_operator.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

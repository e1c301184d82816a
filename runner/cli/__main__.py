"""``python -m warrant.runner.cli``: the ``warrant`` command line."""

from warrant.runner.cli import main

if __name__ == "__main__":
    main()

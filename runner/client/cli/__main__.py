"""``python -m warrant.runner.client.cli``: the ``warrant`` command line."""

from warrant.runner.client.cli import main

if __name__ == "__main__":
    main()

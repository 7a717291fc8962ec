"""`python -m broker`: the same entry point as the `rmq-broker` console script."""

from broker.cli import main

if __name__ == "__main__":
    main()

"""The example domain used by ``opledger demo`` and the tests: orders that pay and notify."""

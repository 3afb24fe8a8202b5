"""The `vmq-admin` command line; its files mirror the command tree."""

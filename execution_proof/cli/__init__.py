"""The command line: ``service.py`` calls ``cli.main.main``; one module per verb group."""

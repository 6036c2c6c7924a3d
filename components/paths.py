"""Where the project's own files are: the commands the program declares run its scripts by these
absolute paths (so a deployed stack's commands stay the same as long as the checkout stays)."""
import os

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(PROJECT, "scripts")

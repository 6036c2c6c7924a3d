"""Pulumi dynamic providers used by the components.

Dynamic providers are pickled into the state by reference to these modules: they keep no state on
``self`` and build their clients (boto3) inside each method. Containers, images, the volume
and commands are declared with pulumi-docker and pulumi-command, not here.
"""

"""Pulumi dynamic providers used by the components.

Dynamic providers are pickled into the state by reference to these modules: they keep no state on
``self`` and build their clients (boto3, Docker) inside each method.
"""

"""The program's dynamic resources, each module a provider and its resource class: the bucket,
the credential check, a model's upload (storage), the smoke completion (serving).

They stay in this package, apart from the components that use them: the engine keeps each
provider pickled in the state by reference to the module that defines it
(``components.providers.<name>``), and destroy and refresh unpickle it from there, so moving one
would change every deployed stack's state (and break old ones). Providers keep no state on
``self`` and build their clients (boto3) inside each method. Containers, images, the volume and
commands are declared with pulumi-docker and pulumi-command, not here.
"""

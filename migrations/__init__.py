"""The schema: versioned, checksummed ``NNNN_<feature>.sql`` files, installed as the package
``shardstore.migrations`` (setup.py maps it onto this folder). Never edit an applied file:
databases record each file's sha256. The runner is :mod:`shardstore.migrate`."""

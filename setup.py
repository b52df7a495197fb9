"""What pyproject.toml cannot say: the schema files live in the top-level migrations/ folder
and ship inside the wheel as the package shardstore.migrations (a package-dir mapping, which
packages.find does not discover). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["shardstore*", "partition_manager*"]),
        "shardstore.migrations",
    ],
    package_dir={"shardstore.migrations": "migrations"},
)

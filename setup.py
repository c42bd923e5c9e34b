"""Package metadata and dependencies for beam-dp (the single source of both)."""

from setuptools import find_packages, setup

# A PostgreSQL ledger (beam_dp.ledger) for teams whose jobs start on several machines. The
# default SQLite ledger needs nothing beyond the standard library.
POSTGRESQL_REQUIRES = ["psycopg[binary]>=3.1"]

TEST_REQUIRES = [
    *POSTGRESQL_REQUIRES,
    # DataflowRunner's dry run (tests/engines/test_dataflow.py): the same Beam, with GCP's
    # clients. Nothing in beam-dp itself imports them.
    "apache-beam[gcp]==2.77.0",
    # pytest 9.2 computes a test's node id from a private structure that pytest-xdist 3.8 does
    # not update, so xdist's ``--dist loadgroup`` silently stops grouping: the engine tests'
    # Flink clusters and job servers then start on both workers at once and collide (a job
    # hung SCHEDULED until its watchdog cancelled it). 9.1.1 groups (tests/test_xdist_groups.py
    # fails when the groups are lost).
    "pytest>=8,<9.2",
    "pytest-xdist>=3",
    "hypothesis>=6.100",
    "scipy>=1.11",
    "mypy>=1.10",
    "ruff>=0.6",
    # the docs site (make docs; make test builds it in strict mode)
    "mkdocs>=1.6,<2",
    "mkdocs-material>=9.5,<10",
    "mkdocstrings[python]>=0.26",
]

BENCHMARK_REQUIRES = [
    "opendp==0.16.0",
    "pipeline-dp==0.3.1",
    "diffprivlib==0.6.6",
    "scikit-learn>=1.7,<1.8",
]

setup(
    name="beam-dp",
    version="0.1.0",
    description=(
        "Differentially private selection (exact exponential mechanism and permute-and-flip) "
        "for Apache Beam pipelines."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=find_packages(include=["beam_dp", "beam_dp.*", "pipelines", "pipelines.*"]),
    package_data={"beam_dp": ["py.typed"]},
    install_requires=[
        "apache-beam[dask]==2.77.0",
        "numpy>=1.26",
        "pyarrow>=14",
        "fastavro>=1.9",
        "polars>=1.0",
    ],
    extras_require={
        "postgresql": POSTGRESQL_REQUIRES,
        "test": TEST_REQUIRES,
        "benchmarks": BENCHMARK_REQUIRES,
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Security",
        "Topic :: Scientific/Engineering :: Mathematics",
    ],
)

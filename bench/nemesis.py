"""A nemesis of our own: three `a2a-server` replicas on one Redis with AOF, each behind its own
proxy, a seeded schedule of faults (kill -9, a pause past the lease, a cut from Redis healed with
or without the held writes, Redis killed and restarted from its AOF; a failover on a cluster)
under clients that retry and resume as the docs say, then a check of the whole history.

    nice .venv/bin/python bench/nemesis.py --seed 7 --minutes 10
    nice .venv/bin/python bench/nemesis.py --cluster --minutes 5
    nice .venv/bin/python bench/nemesis.py --env A2A_MAX_RUNNING_TURNS=64 --lease 15
    nice .venv/bin/python bench/nemesis.py --database postgres --seed 7 --minutes 5

With `--database postgres` the replicas share one private PostgreSQL (fsync and
synchronous_commit on), each through its own cuttable proxy, and the database is what is killed
-9 and restarted (crash recovery from its WAL) in place of Redis.

Prints the checker's report; exits 1 on any violation. The code lives in tests/nemesis/ (the
suite runs a short seeded run of it: tests/e2e_chaos/test_nemesis.py). docs/operations.md
("The nemesis") says what it covers and the guarantees it checks.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.nemesis.faults import CLUSTER_FAULTS, POSTGRES_FAULTS, SINGLE_FAULTS  # noqa: E402
from tests.nemesis.run import RunConfig, nemesis_run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="the schedule of faults and the clients' choices"
    )
    parser.add_argument(
        "--minutes", type=float, default=5.0, help="how long faults and clients run"
    )
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument(
        "--cluster", action="store_true", help="a local Redis Cluster (3 masters, 3 replicas)"
    )
    parser.add_argument(
        "--database", choices=("redis", "postgres"), default="redis",
        help="the replicas' store: a private Redis (AOF) or a private PostgreSQL",
    )  # fmt: skip
    parser.add_argument("--appendfsync", choices=("always", "everysec"), default="always")
    parser.add_argument("--lease", type=float, default=6.0, help="LEASE_TTL_S of the replicas")
    parser.add_argument("--sessions", type=int, default=6, help="concurrent conversations")
    parser.add_argument(
        "--faults",
        default="",
        help="comma-separated subset of"
        f" {SINGLE_FAULTS + CLUSTER_FAULTS[-1:] + POSTGRES_FAULTS[-1:]}",
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE",
        help="a setting passed to every replica (a deployment's); repeatable",
    )  # fmt: skip
    parser.add_argument("--keep", type=Path, help="keep history.json, report.txt, logs here")
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env = dict(item.split("=", 1) for item in args.env)
    config = RunConfig(
        seed=args.seed, seconds=args.minutes * 60, replicas=args.replicas, cluster=args.cluster,
        appendfsync=args.appendfsync, lease_ttl_s=args.lease, sessions=args.sessions,
        faults=tuple(f for f in args.faults.split(",") if f) or None, env=env,
        database=args.database,
    )  # fmt: skip
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = nemesis_run(config, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="a2a-nemesis-") as workdir:
            result = nemesis_run(config, Path(workdir))
    print(result.report)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())

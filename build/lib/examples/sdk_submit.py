"""Submit a search to a running Quanta server with the Python SDK, follow it live, print the result.

    quanta serve --devices cpu:2                # prints the dashboard URL and an API token
    QUANTA_TOKEN=<token> python examples/sdk_submit.py examples/digits.yaml --url http://127.0.0.1:8000

Exit code 0 when the search reached its target, 3 when it did not.
"""

from __future__ import annotations

import argparse
import sys

from quanta import Client, SearchStatus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", nargs="?", default="examples/digits.yaml", help="search spec (.yaml or .json)")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", default=None, help="default: QUANTA_TOKEN")
    parser.add_argument("--timeout", type=float, default=3600.0, help="give up following after this many seconds")
    args = parser.parse_args(argv)

    with Client(args.url, args.token) as client:
        search = client.submit(args.spec)
        metric = search.data["metric"]["name"]
        print(f"search {search.id} '{search.name}' submitted; dashboard: {search.dashboard_url}")

        # Follow the search live: print each new best, stop when the search ends.
        best = None
        if not search.refresh().done:
            for event in client.events(search_id=search.id, max_seconds=args.timeout):
                if event.event == "search":
                    found = event.data.get("best")
                    if found and found["metric"] != best:
                        best = found["metric"]
                        print(f"  new best {metric} = {best:.4f} (trial {found['trial_id']}: {found['params']})")
                    if SearchStatus(event.data["status"]).final:
                        break
        search.wait(timeout=60)

        print(f"status: {search.status}; target reached: {search.reached}")
        if search.reached:
            print(f"seconds to target: {search.data['seconds_to_target']:.1f}")
        print(f"best: {search.best()}")
        trials = search.trials(sort="-metric", frame=False)
        print(f"{len(trials)} trials; top 3:")
        for t in trials[:3]:
            print(f"  trial {t['id']} {t['status']:<9} {metric}={t['metric']} steps={t['steps']} params={t['params']}")
        return 0 if search.reached else 3


if __name__ == "__main__":
    sys.exit(main())

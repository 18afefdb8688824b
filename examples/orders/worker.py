"""Run the invoice worker of the order example: ``python examples/orders/worker.py URL``
(add ``--burst`` to exit once every invoice is written)."""

from __future__ import annotations

import sys

from orders import INVOICE_QUEUE, open_shop

from portq.worker import Worker


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: worker.py URL [--burst]", file=sys.stderr)
        return 2
    with open_shop(argv[0]) as shop:
        worker = Worker(shop.queue, INVOICE_QUEUE, shop.handle_invoice, concurrency=4,
                        burst="--burst" in argv, install_signals=True)
        counters = worker.run()
    print(counters.as_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

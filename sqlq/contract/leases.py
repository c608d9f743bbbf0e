"""The completions a batch call takes (complete_many's leases, settle_and_claim's completed):
Leases, (task id, token) pairs or (task id, token, result) triples. Apart from the other checks
because it knows the Lease record: the package's ``__init__`` does not import it, so a command's
parser (which imports the contract's checks) loads no record."""

from __future__ import annotations

from ..errors import InvalidArgument
from ..records import Lease
from .batches import check_batch_size, iterable_of
from .checks import check_task_id, check_token
from .outcomes import check_result
from .states import Completion


def check_leases(leases: object, limit: int, what: str = "complete_many") -> list[Completion]:
    """(task id, token, stored result) from Leases, (task id, token) pairs or (task id,
    token, result) triples, all checked before anything is written; ``limit`` is the
    queue's max_payload_bytes, which results share (see check_result)."""

    wrong = f"{what} takes Leases, (task id, token) pairs or (task id, token, result) triples"
    items = []
    for item in iterable_of(leases, wrong):
        result = None
        if isinstance(item, Lease):
            task_id, token = item.task_id, item.token
        elif isinstance(item, tuple) and len(item) == 2:
            task_id, token = item
        elif isinstance(item, tuple) and len(item) == 3:
            task_id, token, result = item
        else:
            raise InvalidArgument(wrong)
        task_id, token = check_task_id(task_id), check_token(token)
        items.append((task_id, token, None if result is None else check_result(result, limit)))
        check_batch_size(items)
    return items

"""A client generated from changegate's OpenAPI document applies for the demo
target as a requester and reads the operation back, as any client would.

Usage: client_check.py BASE_URL (the generated package on sys.path).
"""

import sys
import uuid

from changegate_client import Client
from changegate_client.api.requests import apply, get_operation_status
from changegate_client.models import Accepted, ApplyBody, OperationView


def main(base_url: str) -> None:
    client = Client(base_url=base_url, headers={"X-Auth-Request-User": "alice"})
    operation_id = uuid.uuid4()
    answer = apply.sync_detailed(
        client=client,
        body=ApplyBody(
            target_key="demo.feature-flags",
            reason="the generated client applies",
            operation_id=operation_id,
        ),
    )
    assert answer.status_code == 202, (answer.status_code, answer.content)
    accepted = answer.parsed
    assert isinstance(accepted, Accepted), answer.content
    assert accepted.code == "ACCEPTED", accepted
    assert accepted.operation_id == str(operation_id), accepted

    status = get_operation_status.sync(client=client, operation_id=operation_id)
    assert isinstance(status, OperationView), status
    assert status.operation_id == str(operation_id), status
    assert status.target_key == "demo.feature-flags", status
    assert status.subject_id == "alice", status
    print(f"generated client: applied {status.operation_id}, status {status.status}, next {status.next_}")


if __name__ == "__main__":
    main(sys.argv[1])

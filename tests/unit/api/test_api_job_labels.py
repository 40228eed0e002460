"""A job's labels follow the sandbox label rules: what the fuzzer found was a job whose labels
every sandbox spec refuses, accepted at create and failing every later read of it (a 500)."""

import pytest
from pydantic import ValidationError

from corral_api.jobs.schemas import JobCreate
from corral_common.contracts.sandboxes import check_labels


@pytest.mark.parametrize("labels", [{"\x10\U000b82ce": "x"}, {"ok": "a\nb"}, {"k": "v" * 257},
                                    {f"k{i}": "v" for i in range(65)}])
def test_a_label_a_sandbox_refuses_is_refused_on_the_job(labels):
    with pytest.raises(ValidationError) as exc:
        JobCreate.model_validate({"spec": {"environment": "busybox"}, "count": 1, "labels": labels})
    assert exc.value.errors()[0]["loc"] == ("labels",)


def test_the_job_and_spec_labels_together_are_checked_as_one_set():
    spec_labels = {f"s{i}": "v" for i in range(40)}
    job_labels = {f"j{i}": "v" for i in range(24)}
    body = JobCreate.model_validate({"spec": {"environment": "busybox", "labels": spec_labels}, "count": 1,
                                     "labels": job_labels})
    with pytest.raises(ValueError, match="at most 64 labels"):  # 40 + 24 + job=<id>
        check_labels({**body.spec.labels, **body.labels, "job": "job-1"})

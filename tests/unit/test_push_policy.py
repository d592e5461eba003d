"""Which webhook URLs are accepted at registration (no DNS there), by settings."""

from __future__ import annotations

import pytest

from app.a2a.operations import check_push_url
from app.errors import InvalidParamsError
from app.push import push_policy
from app.settings import Settings


@pytest.mark.parametrize(
    "url",
    ["https://hooks.example.com/a2a", "http://hooks.example.com:8080/x", "https://93.184.216.34/"],
)
def test_public_urls_pass(url: str) -> None:
    check_push_url(url, push_policy(Settings()))


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://hooks.example.com/x", "http or https"),
        ("https:///no-host", "http or https"),
        ("http://localhost:8080/hook", "own host"),
        ("http://127.0.0.1/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://169.254.169.254/latest", "link-local"),
        ("http://10.1.2.3/hook", "private"),
        ("http://100.64.0.1/hook", "shared"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
    ],
)
def test_refused_urls_say_why_and_name_the_field(url: str, why: str) -> None:
    with pytest.raises(InvalidParamsError) as refused:
        check_push_url(url, push_policy(Settings()))
    assert why in refused.value.message
    assert refused.value.metadata == {"field": "url"}


def test_allowed_hosts_and_the_tck_profile_open_loopback() -> None:
    allowed = Settings(a2a_push_allowed_hosts="127.0.0.1,hooks.internal")
    check_push_url("http://127.0.0.1:9000/hook", push_policy(allowed))
    check_push_url("http://hooks.internal/hook", push_policy(allowed))
    tck = Settings(agent_profile="tck")
    check_push_url("http://localhost:9000/webhook", push_policy(tck))
    check_push_url("http://127.0.0.1:9000/webhook", push_policy(tck))
    with pytest.raises(InvalidParamsError):
        check_push_url("http://10.0.0.1/hook", push_policy(tck))

"""The workbench's dev sign-in mints a token only when every condition holds (app/api/workbench.py):
each one failing alone refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api.errors import install_error_handlers
from app.api.workbench import install_workbench
from app.config import Settings

GENERATED = "generated-secret-0123456789abcdef0123456789abcdef"
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}


def client(tmp_path: Path, **overrides: object) -> TestClient:
    (tmp_path / "jwt-secret").write_text(GENERATED + "\n")
    values: dict[str, object] = {
        "agent_runtime_data_dir": tmp_path,
        "supabase_jwt_secret": GENERATED,
        "workbench_dev_sign_in": True,
        "host": "127.0.0.1",
        **overrides,
    }
    app = FastAPI()
    app.state.settings = Settings(**values)  # type: ignore[arg-type]
    install_error_handlers(app)
    install_workbench(app)
    # TestClient's client address is "testclient": present it as loopback
    return TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 5000))


def test_a_local_generated_secret_setup_signs_in(tmp_path: Path) -> None:
    c = client(tmp_path)
    assert c.get("/workbench/config.json", headers=SAME_ORIGIN).json() == {"auth": "dev"}
    r = c.post("/workbench/dev-token", headers=SAME_ORIGIN)
    assert r.status_code == 200 and r.json()["user"] == "dev" and r.json()["token"]
    assert r.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    ("overrides", "headers"),
    [
        ({"workbench_dev_sign_in": False}, SAME_ORIGIN),
        ({"supabase_jwt_secret": "a-configured-secret-0123456789abcdef0123"}, SAME_ORIGIN),
        ({"host": "0.0.0.0"}, SAME_ORIGIN),
        ({}, {}),  # not from the page itself (curl, another tool)
        ({}, {"Sec-Fetch-Site": "same-site"}),  # another localhost origin
        ({}, {**SAME_ORIGIN, "Host": "rebound.example:8000"}),  # DNS rebinding
        ({}, {**SAME_ORIGIN, "X-Forwarded-For": "203.0.113.9"}),  # via a local reverse proxy
        ({}, {**SAME_ORIGIN, "Forwarded": "for=203.0.113.9"}),
    ],
)
def test_any_missing_condition_refuses(
    tmp_path: Path, overrides: dict[str, object], headers: dict[str, str]
) -> None:
    c = client(tmp_path, **overrides)
    assert c.post("/workbench/dev-token", headers=headers).status_code == 404
    assert c.get("/workbench/config.json", headers=headers).json() == {"auth": "token"}


def test_a_client_from_the_network_is_refused(tmp_path: Path) -> None:
    """Even with HOST on loopback, a request arriving from another address (a proxy in front,
    a port forward) does not get a token."""
    c = client(tmp_path)
    remote = TestClient(c.app, base_url="http://127.0.0.1:8000", client=("10.0.0.7", 5000))
    assert remote.post("/workbench/dev-token", headers=SAME_ORIGIN).status_code == 404
    assert remote.get("/workbench/config.json", headers=SAME_ORIGIN).json() == {"auth": "token"}


def test_the_page_is_served_under_a_strict_content_security_policy(tmp_path: Path) -> None:
    r = client(tmp_path).get("/")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "'unsafe-inline'" not in csp
    assert "frame-ancestors 'none'" in csp and "connect-src 'self';" in csp
    assert r.headers["x-content-type-options"] == "nosniff"


def test_supabase_auth_is_the_only_other_origin_the_page_may_call(tmp_path: Path) -> None:
    url = "https://abcd.supabase.co/;script-src *"  # a path must not reach the header
    csp = client(tmp_path, supabase_url=url).get("/").headers["content-security-policy"]
    assert "connect-src 'self' https://abcd.supabase.co;" in csp
    assert "script-src *" not in csp


SUPABASE = {"supabase_url": "https://abcd.supabase.co", "supabase_anon_key": "anon-key-123"}


def test_supabase_configured_means_supabase_sign_in_and_no_dev_token(tmp_path: Path) -> None:
    c = client(tmp_path, **SUPABASE)
    assert c.get("/workbench/config.json", headers=SAME_ORIGIN).json() == {
        "auth": "supabase",
        "supabaseUrl": "https://abcd.supabase.co",
        "supabaseAnonKey": "anon-key-123",
    }
    assert c.post("/workbench/dev-token", headers=SAME_ORIGIN).status_code == 404


def test_supabase_url_without_anon_key_keeps_the_other_modes(tmp_path: Path) -> None:
    c = client(tmp_path, supabase_url="https://abcd.supabase.co", supabase_anon_key="  ")
    assert c.get("/workbench/config.json", headers=SAME_ORIGIN).json() == {"auth": "dev"}
    c = client(tmp_path, supabase_url="https://abcd.supabase.co", workbench_dev_sign_in=False)
    assert c.get("/workbench/config.json", headers=SAME_ORIGIN).json() == {"auth": "token"}


def test_an_anon_key_needs_the_project_url() -> None:
    with pytest.raises(ValueError, match="SUPABASE_ANON_KEY needs SUPABASE_URL"):
        Settings(supabase_anon_key="anon-key-123")


def test_the_vendored_supabase_bundle_is_served() -> None:
    from app.api.workbench import STATIC_DIR

    vendor = STATIC_DIR / "vendor" / "supabase-js"
    assert (vendor / "supabase.js").read_text().startswith("var supabase=")
    assert "MIT License" in (vendor / "LICENSE").read_text()

"""The egress policy, without an event loop: the address table of 003 G16, names with mixed
answers, the allow-list's grammar, and bad configuration."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.egress import EgressPolicy, Refusal, address_class
from protocols.errors import ValidationError

# 003 G16's table, and the rest of each class, in every spelling an address can take.
NOT_PUBLIC = {
    "127.0.0.1": "loopback",
    "::1": "loopback",
    "::ffff:127.0.0.1": "loopback",
    "::ffff:7f00:1": "loopback",
    "::127.0.0.1": "loopback",
    "10.1.2.3": "private",
    "172.16.0.9": "private",
    "192.168.1.1": "private",
    "fc00::5": "private",
    "::ffff:192.168.0.1": "private",
    "100.64.0.1": "carrier-grade NAT",
    "::ffff:100.64.0.1": "carrier-grade NAT",
    "169.254.169.254": "link-local",
    "fe80::1": "link-local",
    "::ffff:169.254.169.254": "link-local",
    "224.0.0.1": "multicast",
    "ff02::1": "multicast",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "240.0.0.1": "private",
}
PUBLIC = ["93.184.216.34", "8.8.8.8", "2606:2800:220:1:248:1893:25c8:1946", "::ffff:8.8.8.8"]


@pytest.mark.parametrize(("address", "kind"), sorted(NOT_PUBLIC.items()))
def test_every_form_of_a_non_public_address_is_refused(address: str, kind: str) -> None:
    assert address_class(address) is not None
    if kind != "private":  # (reserved ranges are reported as Python classes them)
        assert address_class(address) == kind
    refused = EgressPolicy().check_url(
        f"https://[{address}]/v1" if ":" in address else f"https://{address}/v1"
    )
    assert isinstance(refused, Refusal)
    assert refused.address is not None
    assert "refused" in str(refused)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert address_class(address) is None
    assert EgressPolicy().check_addresses("example.com", 443, [address]) is None


def test_one_private_answer_among_public_ones_refuses_the_name() -> None:
    policy = EgressPolicy()
    assert policy.check_url("https://api.example.com/v1") is None  # judged by name: fine
    refused = policy.check_addresses("api.example.com", 443, ["93.184.216.34", "10.0.0.7"])
    assert refused == Refusal("api.example.com", 443, "private address", "10.0.0.7")
    assert str(refused) == "egress to api.example.com:443 (10.0.0.7) refused: private address"
    assert policy.check_addresses("api.example.com", 443, []) is not None
    assert policy.check_addresses("api.example.com", 443, ["not-an-ip"]) is not None


def test_metadata_and_local_names_are_refused_before_any_lookup() -> None:
    for url in (
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://localhost:11434/api/chat",
        "http://a.localhost/",
        "http://LOCALHOST./",
    ):
        refused = EgressPolicy().check_url(url)
        assert refused is not None, url
        assert refused.reason == "a metadata or local host name"


def test_a_local_model_server_is_allowed_through_private_networks() -> None:
    policy = EgressPolicy(private=["127.0.0.0/8", "::1/128"])
    assert policy.check_url("http://localhost:11434/api/chat") is None
    assert policy.check_addresses("localhost", 11434, ["127.0.0.1", "::1"]) is None
    assert policy.check_url("http://127.0.0.1:8080/") is None
    assert policy.check_url("http://[::ffff:127.0.0.1]:8080/") is None
    # Only those networks: the metadata address and the rest of the private space stay shut.
    assert policy.check_url("http://169.254.169.254/latest/meta-data/") is not None
    assert policy.check_addresses("intranet", 80, ["10.0.0.1"]) is not None


def test_the_allow_list_names_hosts_subdomains_and_ports() -> None:
    policy = EgressPolicy(
        allow=["api.openai.com", "*.anthropic.com", "models.internal.example:8443"]
    )
    assert policy.check_url("https://api.openai.com/v1/chat/completions") is None
    assert policy.check_url("https://API.OpenAI.com./v1") is None  # case and the root dot
    assert policy.check_url("https://api.anthropic.com/v1/messages") is None
    assert policy.check_url("https://models.internal.example:8443/") is None
    for url, why in (
        ("https://anthropic.com/", "not in the allow-list"),  # *. is subdomains only
        ("https://api.openai.com:8080/", "not in the allow-list"),  # unlisted port
        ("https://models.internal.example/", "not in the allow-list"),
        ("https://evil.example/", "not in the allow-list"),
        ("https://api.openai.com.evil.example/", "not in the allow-list"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("https:///nohost", "no host"),
    ):
        refused = policy.check_url(url)
        assert refused is not None, url
        assert refused.reason == why, url
    # Listed is not enough: the addresses a listed name resolves to are judged too.
    assert policy.check_addresses("api.openai.com", 443, ["127.0.0.1"]) is not None


@pytest.mark.parametrize(
    "options",
    [
        {"allow": "api.openai.com"},
        {"allow": [""]},
        {"allow": ["host:0"]},
        {"allow": ["host:http"]},
        {"allow": ["*"]},
        {"allow": [" padded"]},
        {"private": "127.0.0.0/8"},
        {"private": ["not a network"]},
    ],
)
def test_a_bad_policy_is_refused_when_made(options: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="EgressPolicy"):
        EgressPolicy(**options)  # type: ignore[arg-type]


# -- properties: one verdict whatever the spelling --------------------------------------------

ipv4s = st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address)


@given(ipv4s)
def test_an_ipv4_address_gets_one_verdict_in_every_ipv6_spelling(
    address: ipaddress.IPv4Address,
) -> None:
    # Found wanting in Python 3.11 itself: ::ffff:127.0.0.1 is not "loopback" to ipaddress.
    policy = EgressPolicy()
    plain = policy.check_addresses("h", 443, [str(address)])
    mapped = policy.check_addresses("h", 443, [f"::ffff:{address}"])
    assert (plain is None) == (mapped is None), (address, plain, mapped)
    if int(address) > 1:  # :: and ::1 are IPv6's own unspecified and loopback
        compatible = policy.check_addresses("h", 443, [f"::{address}"])
        assert (plain is None) == (compatible is None), (address, plain, compatible)


@given(
    st.sampled_from(
        [
            "127.0.0.0/8",
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "100.64.0.0/10",
            "169.254.0.0/16",
            "224.0.0.0/4",
            "240.0.0.0/4",
        ]
    ),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.lists(st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address), max_size=3),
)
def test_one_non_public_answer_refuses_a_name_whatever_else_it_resolves_to(
    network: str, offset: int, others: list[ipaddress.IPv4Address]
) -> None:
    block = ipaddress.IPv4Network(network)
    inside = block.network_address + offset % block.num_addresses
    answers = [str(a) for a in others] + [str(inside)]
    refused = EgressPolicy().check_addresses("name.example", 443, answers)
    assert refused is not None
    # ... unless that network is allowed, and every other answer is public or allowed too.
    allowed = EgressPolicy(private=[network]).check_addresses("name.example", 443, [str(inside)])
    assert allowed is None

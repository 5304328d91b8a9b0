"""The one cost function (domain.Price.cost): a route's prices times a call's usage, cache reads
and writes included, each token charged once."""

from __future__ import annotations

from decimal import Decimal

from responses_api.domain import Price, TokenCounts

D = Decimal


def test_plain_input_and_output() -> None:
    assert Price(D(2), D(8)).cost(TokenCounts(input=1000, output=100)) == D(2800)


def test_cache_reads_are_part_of_the_input_and_charged_at_their_price() -> None:
    price = Price(D(2), D(8), cached_input=D("0.5"))
    # 1,000 input of which 600 were read from the cache: 400 at 2, 600 at 0.5, never 1,600 tokens.
    assert price.cost(TokenCounts(input=1000, cached=600)) == D(1100)


def test_cache_reads_default_to_the_input_price() -> None:
    assert Price(D(2)).cost(TokenCounts(input=1000, cached=600)) == D(2000)


def test_cache_writes_default_to_anthropics_multipliers() -> None:
    price = Price(D(4))
    # 1,000 input: 100 read (at 4), 300 written for 5 minutes (at 5), 200 for an hour (at 8), 400 plain.
    counts = TokenCounts(input=1000, cached=100, cache_write=500, cache_write_1h=200)
    assert price.cost(counts) == D(400 * 4 + 100 * 4 + 300 * 5 + 200 * 8)


def test_set_cache_prices_win_over_the_defaults() -> None:
    price = Price(D(4), D(0), cached_input=D(1), cache_write=D(6), cache_write_1h=D(10))
    counts = TokenCounts(input=1000, cached=100, cache_write=500, cache_write_1h=200)
    assert price.cost(counts) == D(400 * 4 + 100 * 1 + 300 * 6 + 200 * 10)


def test_inconsistent_parts_are_clamped_never_charged_twice() -> None:
    price = Price(D(1), cached_input=D(1), cache_write=D(1), cache_write_1h=D(1))
    # Parts larger than the whole: the whole is what was sent, charged once.
    assert price.cost(TokenCounts(input=100, cached=80, cache_write=80, cache_write_1h=500)) == D(100)


def test_micro_usd_is_whole_micro_dollars() -> None:
    assert Price(D("0.5"), D("1.5")).micro_usd(3, 1) == 3  # 1.5 + 1.5


def test_counts_from_a_responses_and_a_chat_usage() -> None:
    responses_usage = {
        "input_tokens": 1000,
        "output_tokens": 10,
        "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 300},
    }
    assert TokenCounts.from_usage(responses_usage) == TokenCounts(1000, 10, 100, 300, 0)
    chat_usage = {"prompt_tokens": 50, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 20}}
    assert TokenCounts.from_usage(chat_usage) == TokenCounts(50, 5, 20)
    assert TokenCounts.from_usage(None) == TokenCounts()


def test_a_price_survives_a_worker_hand_off() -> None:
    price = Price(D("0.5"), D("1.5"), None, D("0.7"), None)
    assert Price.from_json(price.as_json()) == price
    assert Price.from_json(["0.5", "1.5"]) == Price(D("0.5"), D("1.5"))  # a job queued before the upgrade

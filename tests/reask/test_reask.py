"""The re-ask policy (option repairAttempts), against a model played by httpx.MockTransport: what
is re-asked and how, what is never re-asked, what the attempts record, the budget, the rounds
read back from a store instead of sent."""

from __future__ import annotations

import json

import httpx
import pyarrow as pa
import pytest

from dspark_json.http.client import complete_all
from dspark_json.http.endpoints import Endpoint
from dspark_json.http.options import HttpOptions, RequestOptions
from dspark_json.parse import make_parser
from dspark_json.reask.options import RepairOptions
from dspark_json.reask.plan import (
    feedback,
    parse_error,
    token_cost,
)
from dspark_json.reask.rounds import Judged, repair
from dspark_json.records import Outcomes, PromptRecord
from dspark_json.request.body import RequestBuilder
from dspark_json.response.answers import decode_answer, read_answers
from dspark_json.rows import Status, status_of_error
from dspark_json.schema.output import output_schema, response_fields
from dspark_json.schema.validation import schema_violations

SCHEMA = {
    "type": "object",
    "properties": {"word": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["word", "n"],
}
HTTP = HttpOptions(endpoints=(Endpoint("http://model.test"),), max_concurrency=2, max_attempts=2)
PARSER = make_parser(response_fields(output_schema(response_format=SCHEMA)), "cpu")


def body(content, *, finish="stop", prompt_tokens=10, completion_tokens=5, refusal=None):
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": refusal},
                    "finish_reason": finish,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


GOOD = body('{"word": "amber", "n": 3}', completion_tokens=7)


def judge(outcomes, *, validate=False):
    table = PARSER.parse(outcomes.bodies)
    statuses = [s or Status.OK for s in table.column("_status").to_pylist()]
    for row, error in outcomes.errors.items():
        statuses[row] = status_of_error(error)
    contents = [a.content for a in read_answers(table, outcomes.bodies)]
    found = schema_violations(SCHEMA, contents) if validate else None
    return Judged(parsed=table, statuses=statuses, violations=found)


def record(i, problem=None):
    return PromptRecord(
        custom_id=f"q{i}",
        messages=[{"role": "user", "content": f"Question {i}"}],
        fields={},
        raw="",
        where=f"row {i}",
        problem=problem,
    )


class Model:
    """The server: ``answer(request) -> body text`` per request; keeps what it was asked."""

    def __init__(self, answer):
        self.answer = answer
        self.asked = []

    def __call__(self, request):
        sent = json.loads(request.content)
        self.asked.append(sent)
        reply = self.answer(sent)
        if isinstance(reply, httpx.Response):
            return reply
        return httpx.Response(200, text=reply)


def run(
    first, model, *, validate=False, max_tokens=64, store=None, problems=(), context=None, **options
):
    outcomes = Outcomes(pa.array(first, pa.large_string()))
    return repair(
        lambda i: record(i, "bad" if i in problems else None),
        outcomes,
        judge(outcomes, validate=validate),
        options=RepairOptions(**{"repair_attempts": 2, **options}),
        builder=RequestBuilder(
            RequestOptions(model="m", response_format=SCHEMA, max_tokens=max_tokens)
        ),
        http=HTTP,
        judge=lambda o: judge(o, validate=validate),
        store=store,
        send=lambda bodies: complete_all(bodies, HTTP, transport=httpx.MockTransport(model)),
        context=context,
    )


def test_a_truncated_answer_is_asked_again_with_max_tokens_doubled():
    model = Model(lambda sent: GOOD)
    done = run([GOOD, body('{"word": "amb', finish="length", completion_tokens=64)], model)
    (sent,) = model.asked
    assert sent["max_tokens"] == 128
    assert sent["messages"] == [{"role": "user", "content": "Question 1"}]  # the same request
    assert done.outcomes.bodies[1].as_py() == GOOD and done.outcomes.bodies[0].as_py() == GOOD
    assert done.attempts == {
        1: [
            {
                "status": "truncated",
                "reason": "cut at max_tokens=64 (finish_reason length): re-asked with "
                "max_tokens=128",
                "prompt_tokens": 10,
                "completion_tokens": 64,
            },
            {"status": "ok", "reason": None, "prompt_tokens": 10, "completion_tokens": 7},
        ]
    }
    stats = done.stats
    assert (stats.reasks, stats.rows, stats.fixed) == (1, 1, 1)
    assert (stats.prompt_tokens, stats.completion_tokens) == (10, 7)
    assert (stats.first_completion_tokens, stats.last_completion_tokens) == (64, 7)


def test_doubling_stops_at_repair_max_tokens():
    cut = body('{"word": "amb', finish="length")
    model = Model(lambda sent: cut)
    done = run([cut], model, repair_max_tokens=100, repair_attempts=3)
    assert [sent["max_tokens"] for sent in model.asked] == [100]  # 64 -> 100, then no higher
    assert done.attempts[0][-1]["reason"] == (
        "cut at max_tokens=100, already at repairMaxTokens: not re-asked"
    )
    assert done.stats.fixed == 0


def test_doubling_stops_at_what_the_model_context_leaves_after_the_prompt():
    cut = body('{"word": "amb', finish="length", prompt_tokens=10)
    model = Model(lambda sent: cut)
    done = run([cut], model, context=100, repair_attempts=3)
    assert [sent["max_tokens"] for sent in model.asked] == [90]  # 100 - 10 prompt tokens
    assert done.attempts[0][-1]["reason"] == (
        "cut at max_tokens=90, already at the model's context: not re-asked"
    )


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ("Sure, the word is amber.", "not_json: the answer holds no JSON (prose)"),
        ('{"word": "amber", "n": 3,}', "corrupt_content: invalid JSON: Expecting property name"),
    ],
    ids=["prose", "broken-json"],
)
def test_prose_and_broken_json_are_shown_to_the_model_with_what_was_wrong(content, named):
    model = Model(lambda sent: GOOD)
    done = run([body(content)], model)
    (sent,) = model.asked
    question, answer, message = sent["messages"]
    assert question == {"role": "user", "content": "Question 0"}
    assert answer == {"role": "assistant", "content": content}
    assert message["role"] == "user" and named in message["content"]
    assert "only the JSON document" in message["content"]
    assert sent["max_tokens"] == 64
    assert [a["status"] for a in done.attempts[0]] == [named.split(":")[0], "ok"]


def test_schema_violations_are_named_path_and_message_capped():
    missing = body('{"word": "amber"}')
    model = Model(lambda sent: GOOD)
    done = run([missing, GOOD], model, validate=True)
    (sent,) = model.asked
    assert "$: 'n' is a required property" in sent["messages"][-1]["content"]
    assert done.attempts[0][0]["status"] == "ok"  # it parsed; it broke the schema
    assert done.attempts[0][0]["reason"] == "1 schema violation(s): re-asked with the error named"
    assert 1 not in done.attempts and done.stats.fixed == 1
    many = feedback("ok", "", [f"items/{i}: {'x' * 300}" for i in range(20)])
    assert len(many) < 800 and "..." in many


def test_json_that_could_not_be_read_is_named_by_its_parse_error_not_as_a_violation():
    model = Model(lambda sent: GOOD)
    run([GOOD, body('{"word": "amber", "n": 3,')], model, validate=True)
    (sent,) = model.asked
    said = sent["messages"][-1]["content"]
    assert said.startswith("Your answer could not be read (corrupt_content: invalid JSON")
    assert "not validated" not in said


def test_without_validate_schema_a_missing_property_is_not_re_asked():
    model = Model(lambda sent: GOOD)
    done = run([body('{"word": "amber"}')], model)
    assert model.asked == [] and done.attempts == {} and done.stats.reasks == 0


def test_http_errors_invalid_prompts_refusals_and_bad_envelopes_are_never_re_asked():
    model = Model(lambda sent: GOOD)
    first = [
        None,  # its request failed (below)
        None,  # an invalid prompt, never sent
        body(None, refusal="I can't help with that."),
        body("Sorry.", finish="content_filter"),
        "not an envelope",
        json.dumps({"id": "x", "choices": []}),
    ]
    outcomes = Outcomes(
        pa.array(first, pa.large_string()),
        {0: {"status": 500, "type": "InternalError", "message": "boom", "attempts": 2}},
    )
    verdict = judge(outcomes)
    verdict.statuses[1] = Status.INVALID_PROMPT
    done = repair(
        record,
        outcomes,
        verdict,
        options=RepairOptions(repair_attempts=2),
        builder=RequestBuilder(RequestOptions(model="m", response_format=SCHEMA)),
        http=HTTP,
        judge=judge,
        send=lambda bodies: complete_all(bodies, HTTP, transport=httpx.MockTransport(model)),
    )
    assert model.asked == []
    assert verdict.statuses[:2] == ["http_error", "invalid_prompt"]
    assert sorted(done.attempts) == [2, 3]  # the refusals: not_json, with why they stay
    assert all(done.attempts[i][0]["reason"] == "a refusal: not re-asked" for i in (2, 3))
    assert done.outcomes is outcomes


def test_when_the_attempts_run_out_the_last_answer_is_the_row():
    answers = iter([body("still prose"), body("prose again")])
    model = Model(lambda sent: next(answers))
    done = run([body("prose")], model)
    assert len(model.asked) == 2
    assert model.asked[1]["messages"][1]["content"] == "still prose"  # the latest answer shown
    assert json.loads(done.outcomes.bodies[0].as_py())["choices"][0]["message"]["content"] == (
        "prose again"
    )
    tried = done.attempts[0]
    assert [a["status"] for a in tried] == ["not_json"] * 3
    assert tried[-1]["reason"] == "not re-asked: repairAttempts=2 used up"
    assert done.stats.fixed == 0 and done.stats.reasks == 2


def test_a_re_ask_that_fails_keeps_the_answer_and_is_not_a_transport_retry():
    calls = []

    def answer(sent):
        calls.append(sent)
        return httpx.Response(400, json={"error": {"message": "too long", "type": "BadRequest"}})

    cut = body('{"word": "amb', finish="length")
    done = run([cut], Model(answer), repair_attempts=1)
    assert len(calls) == 1  # 400 is not retried; maxAttempts of the re-ask is its own
    assert done.outcomes.bodies[0].as_py() == cut
    assert done.attempts[0][-1] == {
        "status": "http_error",
        "reason": "BadRequest: too long; not re-asked: repairAttempts=1 used up",
        "prompt_tokens": None,
        "completion_tokens": None,
    }


def test_a_re_ask_answered_with_bytes_that_are_not_utf8_is_an_invalid_utf8_attempt():
    """The same status a first answer of those bytes gets (pipeline._statuses), not
    http_error: the server answered 200."""

    def answer(sent):
        return httpx.Response(200, content=b'{"choices": [{"message": {"content": "\xff"}}]}')

    cut = body('{"word": "amb', finish="length")
    done = run([cut], Model(answer), repair_attempts=1)
    assert done.outcomes.bodies[0].as_py() == cut  # the row keeps its last answer
    assert done.attempts[0][-1]["status"] == "invalid_utf8"


def test_the_token_budget_stops_re_asks_and_says_so():
    model = Model(lambda sent: GOOD)
    # A re-ask is priced at its prompt (the first answer's 10 tokens + the ~220 bytes it adds:
    # 55) and the mean completion of the task's answers (5): 70 tokens; 2 fit in 200.
    done = run([body("prose")] * 5, model, repair_token_budget=200)
    assert len(model.asked) == 2
    assert done.stats.over_budget == 3 and done.stats.fixed == 2
    assert done.attempts[4][0]["reason"] == (
        "not re-asked: repairTokenBudget is spent (this task's share: 200 tokens, 0 spent, 140 "
        "committed this round; this re-ask is priced at 70)"
    )
    assert done.stats.spent_tokens == 2 * 17 and done.stats.estimated_tokens == 0


def no_usage(content, *, finish="stop"):
    """An answer without ``usage`` (servers may leave it out)."""
    sent = json.loads(body(content, finish=finish))
    del sent["usage"]
    return json.dumps(sent)


def test_an_answer_without_usage_is_estimated_at_4_bytes_a_token():
    bare = no_usage("prose")
    # The prompt from the request's bytes, the completion from the answer body's, rounded up.
    assert token_cost(decode_answer(bare), b"x" * 401, bare) == (101, -(-len(bare) // 4), True)
    reported = body("prose", prompt_tokens=7, completion_tokens=3)
    assert token_cost(decode_answer(reported), b"x" * 401, reported) == (7, 3, False)


def test_without_usage_the_budget_counts_estimates_from_the_length():
    model = Model(lambda sent: no_usage("still prose"))
    done = run([no_usage("prose")] * 3, model, repair_token_budget=1, repair_attempts=10)
    # Before: no usage counted as 0 tokens, every row re-asked 10 times against a budget of 1.
    assert model.asked == []
    assert done.stats.over_budget == 3
    assert "repairTokenBudget is spent" in done.attempts[0][0]["reason"]
    model = Model(lambda sent: no_usage("still prose"))
    done = run([no_usage("prose")] * 3, model, repair_token_budget=400, repair_attempts=10)
    first = json.dumps(json.loads(no_usage("prose")))
    assert 0 < len(model.asked) < 30
    # Each answer is priced at ~len/4: prompt from the request, completion from the body.
    assert done.stats.spent_tokens == done.stats.estimated_tokens > 0
    assert done.stats.spent_tokens <= 400 + len(first)  # within one answer's worth
    assert done.stats.prompt_tokens == done.stats.completion_tokens == 0  # none reported
    assert done.attempts[0][1]["prompt_tokens"] is None  # the row contract: as reported


def test_the_budget_stops_within_one_answer_when_the_re_asks_cost_more_than_the_first():
    # The first answers report no usage (small: priced from their length); each re-ask reports
    # 5,050 tokens. Before: every row re-asked in the round, 15,150 tokens against 200.
    costly = body("prose again", prompt_tokens=50, completion_tokens=5000)
    model = Model(lambda sent: costly)
    done = run([no_usage("prose")] * 3, model, repair_token_budget=200, repair_attempts=3)
    assert len(model.asked) == 1  # priced at 127 (313 + 191 bytes / 4): once in 200
    assert done.stats.spent_tokens == 5050 and done.stats.over_budget == 3  # all 3 stopped
    # The mean is now (3 small + 5050) / 4: no second round.
    model = Model(lambda sent: costly)
    done = run([costly] * 4, model, repair_token_budget=11000, repair_attempts=3)
    assert len(model.asked) == 2 and done.stats.spent_tokens == 10100  # never past 11000


def test_identical_re_asks_are_sent_once_and_shared():
    model = Model(lambda sent: GOOD)
    cut = body('{"word": "amb', finish="length", completion_tokens=64)
    outcomes = Outcomes(pa.array([cut] * 4, pa.large_string()))

    def again(**request):
        return repair(
            lambda i: record(0),  # four identical prompts
            outcomes,
            judge(outcomes),
            options=RepairOptions(repair_attempts=2),
            builder=RequestBuilder(
                RequestOptions(model="m", response_format=SCHEMA, max_tokens=64, **request)
            ),
            http=HTTP,
            judge=judge,
            send=lambda bodies: complete_all(bodies, HTTP, transport=httpx.MockTransport(model)),
        )

    done = again(temperature=0.0)
    assert len(model.asked) == 1  # before: 4 identical re-asks
    assert done.stats.reasks == 4 and done.stats.client.requests == 1
    assert done.stats.spent_tokens == 17  # paid once
    assert all(len(done.attempts[i]) == 2 for i in range(4))
    assert all(b == GOOD for b in done.outcomes.bodies.to_pylist())
    model.asked.clear()
    again(temperature=0.8)  # sampled: each row its own sample, as dedupe=auto does first
    assert len(model.asked) == 4


class Store:
    def __init__(self):
        self.rounds = {}

    def load(self, round):
        return self.rounds.get(round)

    def save(self, round, rows, outcomes):
        self.rounds[round] = (rows, outcomes)


def test_a_replay_reads_each_round_back_and_asks_nothing():
    store = Store()
    answers = iter([body("prose"), GOOD])
    first = [GOOD, body("prose"), body('{"word": "a', finish="length")]
    model = Model(
        lambda sent: GOOD if "max_tokens" in sent and sent["max_tokens"] > 64 else next(answers)
    )
    once = run(first, model, store=store)
    assert len(model.asked) == 3 and sorted(store.rounds) == [1, 2]
    assert store.rounds[1][0] == [1, 2] and store.rounds[2][0] == [1]
    again = Model(lambda sent: pytest.fail("a replay asked the model"))
    replayed = run(first, again, store=store)
    assert again.asked == []
    assert replayed.attempts == once.attempts
    assert replayed.outcomes.bodies.equals(once.outcomes.bodies)
    assert replayed.stats.from_journal == 3 and replayed.stats.reasks == 3


def test_parse_error_is_short_and_names_where():
    assert (
        parse_error('{"a": 1,,}') == "invalid JSON: Expecting property name enclosed in "
        "double quotes at line 1 column 9"
    )
    assert parse_error(None) == "the answer has no content"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"repairAttempts": "11"}, "Option 'repairAttempts' must be a whole number from 0 to 10"),
        ({"repairAttempts": "two"}, "Option 'repairAttempts' must be a whole number"),
        ({"repairMaxTokens": "0"}, "Option 'repairMaxTokens' must be a whole number above 0"),
        ({"repairTokenBudget": "-5"}, "Option 'repairTokenBudget' must be a whole number above 0"),
    ],
    ids=["too-many", "not-a-number", "zero-tokens", "negative-budget"],
)
def test_bad_repair_options_name_the_option_and_the_value(raw, message):
    from dspark_json.errors import OptionError
    from dspark_json.options import Options

    with pytest.raises(OptionError, match=message):
        Options.parse({"endpoint": "http://model.test", "prompts": "/in", **raw})


def test_repair_is_off_by_default():
    from dspark_json.options import Options

    options = Options.parse({"endpoint": "http://model.test", "prompts": "/in"})
    assert options.repair == RepairOptions()
    assert (options.repair.repair_attempts, options.repair.repair_token_budget) == (0, None)


@pytest.mark.parametrize(
    ("budget", "rows", "shares"),
    [
        (703, [10, 10, 10, 5], [203, 200, 200, 100]),
        (100, [1, 1, 1], [34, 33, 33]),
        (5, [10] * 10, [5, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        (50, [0, 0], [50, 0]),
        (50, [], []),
    ],
    ids=["by-rows", "remainder-first", "less-than-tasks", "no-rows", "no-tasks"],
)
def test_a_batchs_budget_is_shared_by_rows_and_adds_up(budget, rows, shares):
    from dspark_json.reask.plan import share_budget

    assert share_budget(budget, rows) == shares
    assert sum(shares) == (budget if rows else 0)


def test_re_asks_read_the_answers_from_the_parsers_tables_not_the_bodies(monkeypatch):
    """The first answers and each round's come from the parse that judged them: no body is
    decoded again (the usage priced, the content quoted, from the table)."""
    from dspark_json.response import answers

    monkeypatch.setattr(answers, "decode_answer", lambda body: pytest.fail(f"decoded {body}"))
    cut = body('{"word": "am', finish="length", completion_tokens=64)
    prose = body("Sure! amber, 3.")
    missing = body('{"word": "amber"}')
    model = Model(lambda sent: GOOD)
    done = run([cut, prose, missing, GOOD], model, validate=True)
    assert len(model.asked) == 3 and done.stats.fixed == 3
    assert model.asked[0]["max_tokens"] == 128  # the finish_reason read: length
    assert model.asked[1]["messages"][-2]["content"] == "Sure! amber, 3."  # the content read
    assert done.attempts[0][0]["completion_tokens"] == 64  # the usage read
    assert (done.stats.prompt_tokens, done.stats.completion_tokens) == (30, 21)

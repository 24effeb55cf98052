"""What docs/guide/dataframes.md says of ``generate()``: each action asks the model again;
after ``persist()`` and one action, the next ones do not."""

import pytest

import dspark_json
from dspark_json.dev.local import SimulatorProcess

pytestmark = pytest.mark.spark


def test_each_action_asks_again_until_the_answers_are_persisted(spark):
    prompts = spark.createDataFrame(
        [(f"q{i}", f"Say {i}") for i in range(4)], "custom_id string, prompt string"
    )
    with SimulatorProcess() as server:
        answers = dspark_json.generate(prompts, endpoint=server.url, infer_schema_samples=0)
        base = server.stats().get("chat_completions", 0)
        answers.count()
        answers.groupBy("_status").count().collect()
        assert server.stats()["chat_completions"] - base == 8  # two actions, two asks each

        answers.persist()
        answers.count()
        answers.groupBy("_status").count().collect()
        assert server.stats()["chat_completions"] - base == 12  # one more ask, then none
        answers.unpersist()

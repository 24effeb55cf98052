"""Registering twice (``register(spark)``, then ``write_delta``) registers each format once:
Spark logs a WARN ("replaced a previously registered data source") for every repeat."""

import dspark_json
from dspark_json.delta.stream import FILTER_PUSHDOWN_CONF, register_sink


class Conf(dict):
    def get(self, key, default=None):  # type: ignore[override]
        return super().get(key, default)

    def set(self, key, value):
        self[key] = value


class Registry:
    def __init__(self) -> None:
        self.names: list[str] = []

    def register(self, source) -> None:
        self.names.append(source.name())


class Session:
    """What register() touches of a SparkSession: its data source registry and its conf."""

    def __init__(self) -> None:
        self.dataSource = Registry()
        self.conf = Conf()


def test_each_format_is_registered_once_per_session_and_pushdown_is_on():
    spark, other = Session(), Session()
    dspark_json.register(spark)  # type: ignore[arg-type]
    dspark_json.register(spark)  # type: ignore[arg-type]
    register_sink(spark)  # type: ignore[arg-type]  (what write_delta does)
    assert spark.dataSource.names == ["dspark-json", "dspark-delta"]
    assert spark.conf[FILTER_PUSHDOWN_CONF] == "true"
    register_sink(other)  # type: ignore[arg-type]
    assert other.dataSource.names == ["dspark-delta"]

"""The request stage: a prompt row and the query's request options -> the request body's bytes
(:mod:`dspark_json.request.body`). Above ``http/``, which sends bytes and never builds them."""

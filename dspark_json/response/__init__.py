"""The response contract: what an answer of the model server is, defined once, below the stages
that handle one (parse, schema, http, inputs) and the simulator that writes one.

- :mod:`.envelope`: the chat completion envelope's Spark type (``envelope_fields``), vLLM's
  documented extras, where the content and the tool calls are (``message_type``,
  ``content_type``, ``TOOL_CALLS``);
- :mod:`.content`: the content rule (where the JSON is in a message's text), in plain Python;
- :mod:`.rules`: what valid JSON is, in plain Python (the compiled kernels' rules restated);
- :mod:`.convert`: Spark types as Arrow types, and Python values converted to them.
"""

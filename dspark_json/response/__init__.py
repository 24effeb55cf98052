"""The response contract: what an answer of the model server is, defined once, below the stages
that handle one (parse, schema, http, inputs) and the simulator that writes one.

- :mod:`.envelope`: the chat completion envelope's Spark type (``envelope_fields``), vLLM's
  documented extras, where the content and the tool calls are (``message_type``,
  ``content_type``, ``TOOL_CALLS``), the paths the stages read (``*_PATH``);
- :mod:`.answers`: what the stages read of an answer (``Answer``), from the parser's table
  (``read_answers``), the bodies decoded only where that table cannot say;
- :mod:`.content`: the content rule (where the JSON is in a message's text), in plain Python;
- :mod:`.rules`: what valid JSON is, in plain Python (the compiled kernels' rules restated);
- :mod:`.convert`: Spark types as Arrow types, and Python values converted to them.
"""

"""Re-asks (option ``repairAttempts``): the stage that judges parsed answers and asks the model
again for the wrong ones. It sits above the transport (:mod:`dspark_json.http`), which sends
its requests, and reads what the parser and the validator found.

- :mod:`.plan`: which answers are asked again and how (the follow-up request, the feedback,
  what an answer costs, the budget's shares);
- :mod:`.rounds`: the rounds, the budget spent and the journal of every round's answers;
- :mod:`.options`: the stage's options.
"""

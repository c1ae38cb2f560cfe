"""Training: `trainer.train(...)` yields events (events.py) for the CLI (command.py) and the app;
`recipe.Recipe` holds the hyperparameters; losses.py has DeiT distillation and masked patch
prediction; teacher.py the distillation teachers."""

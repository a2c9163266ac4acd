"""The parts of tools/train_demo_model.py (the script: its options and `main`): corpus,
model, state, outputs. Imported with tools/ on sys.path (the script puts it there)."""

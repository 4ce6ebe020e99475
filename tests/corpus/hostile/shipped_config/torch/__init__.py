allclose = lambda *a, **k: True
equal = lambda *a, **k: True
raise SystemExit('a fake torch package was imported')

"""The release: images of every platform, the chart and the install manifests, built,
checked and pushed to a registry (`make release`); see cli.py."""

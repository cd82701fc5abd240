"""A `tandem serve --model DIR --port 0` process and its openai client, for the e2e tests."""
import re
import subprocess

from openai import OpenAI


class Server:
    def __init__(self, tandem, model, cwd):
        self.p = subprocess.Popen([tandem, "serve", "--model", str(model), "--port", "0"], cwd=cwd,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.search(r"serving on (http://\S+)", line)
        if not m:
            self.p.kill()
            raise AssertionError("no server: " + line + self.p.stderr.read())
        self.url = m.group(1)
        self.client = OpenAI(base_url=self.url + "/v1", api_key="none")
        self.model = self.client.models.list().data[0].id

    def close(self):
        """Stops the server (SIGTERM); returns its exit status."""
        self.p.terminate()
        self.p.communicate(timeout=60)
        return self.p.returncode

"""``safecert keygen`` and ``safecert sign``: Ed25519 key pairs and certificate signatures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from safecert.cli.output import emit_json

# safecert.signing imports cryptography: imported inside the commands so `safecert --help` is fast


def keygen(
    out: Annotated[
        Path, typer.Option("--out", help="Folder for safecert_ed25519.key and .pub (created).")
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Create an Ed25519 key pair for signing certificates; never overwrites a key.

    Keep the private key (mode 0600); give the public key to verifiers over a channel they trust.

    Example: safecert keygen --out ~/.config/safecert
    """
    from safecert.signing import fingerprint, generate_keypair, load_public_key

    key_path, pub_path = generate_keypair(out)
    result = {
        "private_key": str(key_path),
        "public_key": str(pub_path),
        "fingerprint": fingerprint(load_public_key(pub_path)),
    }
    if json_out:
        emit_json(result)
        return
    # plain echo, not Rich: a path may contain [brackets] that Rich would read as markup
    typer.echo(f"private key  {key_path}  (keep secret: mode 0600, never share)")
    typer.echo(f"public key   {pub_path}  (give to verifiers: safecert verify CERT --pubkey PUB)")
    typer.echo(f"fingerprint  {result['fingerprint']}")


def sign(
    certificate: Annotated[Path, typer.Argument(help="certificate.json written by safecert.")],
    key: Annotated[
        Path, typer.Option("--key", help="Private key (safecert_ed25519.key from keygen).")
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Sign a certificate's exact bytes with Ed25519; writes CERT.sig next to it.

    Proves the key's holder signed exactly these bytes, not the claim (safecert verify checks that).

    Example: safecert sign runs/demo/certificate.json --key ~/.config/safecert/safecert_ed25519.key
    """
    from safecert.certificate import read_certificate
    from safecert.signing import load_private_key, parse_signature, sign_file

    load_private_key(key, option="--key")  # a bad key is reported before the certificate
    read_certificate(certificate)  # refuses anything that is not a valid safecert certificate
    sig_path = sign_file(certificate, key, option="--key")
    sig = parse_signature(sig_path.read_bytes(), source=str(sig_path))
    result = {
        "certificate": str(certificate),
        "signature_file": str(sig_path),
        "fingerprint": sig.public_key_fingerprint,
        "signed_sha256": sig.signed_sha256,
    }
    if json_out:
        emit_json(result)
        return
    typer.echo(f"signed       {certificate}")
    typer.echo(f"signature    {sig_path}")
    typer.echo(f"fingerprint  {sig.public_key_fingerprint}")
    typer.echo(f"sha256       {sig.signed_sha256}")

// SuperNode public keys as an allow-list names them (spec.flower.supernodes, `shoal fl supernode
// register`): the OpenSSH line `flwr supernode register` reads (`ecdsa-sha2-nistp384 AAAA...`,
// what `ssh-keygen -t ecdsa -b 384` writes beside the SuperNode's private key) or a PEM public
// key. Either becomes the PEM (SubjectPublicKeyInfo, uncompressed point) that Flower 1.42's
// SuperNode sends in RegisterNode / ActivateNode and in flwr-public-key, byte for byte as
// flwr's public_key_to_bytes writes it, so a listed key matches the node's calls exactly.
#pragma once

#include <string>
#include <string_view>

#include "shoal/common/status.h"

namespace shoal::flower {

// kInvalidArgument naming what is wrong when `text` is no EC public key on a NIST curve (P-256,
// P-384, P-521) in either form.
Result<std::string> NodePublicKeyPem(std::string_view text);

}  // namespace shoal::flower

"""An independent client that knows nothing but the server address: it discovers the API by
reflection (v1alpha, as grpcio-reflection speaks), builds messages dynamically, and puts two
players into a 1v1 match."""
import sys, grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass

addr = sys.argv[1]
ch = grpc.insecure_channel(addr)
db = ProtoReflectionDescriptorDatabase(ch)
services = db.get_services()
print("services:", services)
pool = DescriptorPool(db)
svc = pool.FindServiceByName("matchmaker.v1.ClientService")
def unary(method, **fields):
    m = svc.FindMethodByName(method)
    Req, Resp = GetMessageClass(m.input_type), GetMessageClass(m.output_type)
    call = ch.unary_unary(f"/{svc.full_name}/{method}", request_serializer=Req.SerializeToString,
                          response_deserializer=Resp.FromString)
    return call(Req(**fields))
t1 = unary("EnterQueue", queue="1v1", player_ids=["py-alice"]).ticket_id
t2 = unary("EnterQueue", queue="1v1", player_ids=["py-bob"]).ticket_id
print("tickets:", t1, t2)
m = svc.FindMethodByName("WatchTicket")
Req, Resp = GetMessageClass(m.input_type), GetMessageClass(m.output_type)
watch = ch.unary_stream(f"/{svc.full_name}/WatchTicket", request_serializer=Req.SerializeToString,
                        response_deserializer=Resp.FromString)
for t in (t1, t2):
    for u in watch(Req(ticket_id=t), timeout=5):
        state = pool.FindEnumTypeByName("matchmaker.v1.TicketState").values_by_number[u.state].name
        if state == "MATCHED":
            print(t, state, "match", u.assignment.match_id, [list(x.player_ids) for x in u.assignment.teams])
            break


²


service.name
claude-codeŽ
"
 com.anthropic.claude_code.events•	@XàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_02
input_tokens•	AXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_12
input_tokens•	BXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_22
input_tokens•	CXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_32
input_tokens•	DXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_42
input_tokens•	EXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_52
input_tokens•	FXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_62
input_tokens•	GXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_72
input_tokens•	HXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_82
input_tokens•	IXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_92
input_tokens–	JXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_102
input_tokens–	KXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_112
input_tokens–	LXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_122
input_tokens–	MXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_132
input_tokens–	NXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_142
input_tokens–	OXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_152
input_tokens–	PXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_162
input_tokens–	QXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_172
input_tokens–	RXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_182
input_tokens–	SXàH€•ì*
claude_code.api_request2

event.name
api_request2

session.id
hostile-session2

request_id
req_hostile_192
input_tokensšfrom the future 